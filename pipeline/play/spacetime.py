"""The spacetime graph and the HUD's reach figures of a played fight (placeholder: none yet).

:func:`payload` is called once per frame and seat; it returns ``None`` or a dict whose
``"spacetime"`` entry goes into the state message's ``spacetime`` field and whose ``"hud"``
entry (a dict) is merged into the seat's HUD.
"""

from __future__ import annotations

from typing import Any

from pipeline.play.session import SessionView


def payload(session_state: SessionView, seat: str) -> dict[str, Any] | None:
    """Nothing yet: the page shows no graph and the HUD no reach figures."""
    return None
