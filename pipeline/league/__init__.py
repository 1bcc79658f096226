"""The self-play league: the pool of past selves and anchors (:mod:`pipeline.league.pool`), how
an opponent is picked (:mod:`pipeline.league.matchmaking`) and the records and ratings it keeps
(:mod:`pipeline.league.records`)."""
