"""The self-play league: the pool of past selves and anchors, matchmaking and ratings."""
