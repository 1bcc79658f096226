"""``python -m pipeline.play``: fly the duel in a browser, or watch two agents fight live.

The fight is the project's own simulator (:class:`sim.BatchedSim`, one environment) stepped on
the server in real time (:mod:`pipeline.play.session`); each side is a seat
(:mod:`pipeline.play.seats`) flown by a person at a keyboard or by any agent the launcher takes.
:mod:`pipeline.play.server` serves the page (``static/``) and one WebSocket at ``/ws`` whose
messages :mod:`pipeline.play.protocol` defines and checks. docs/play.md describes it all.
"""
