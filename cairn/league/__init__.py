"""League self-play: fixed and scripted opponents, games against them (docs/league.md)."""
