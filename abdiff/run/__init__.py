"""A measurement's run: the session's wiring, the interleaving plan, one side's round, the
parent<->worker protocol, ranks, progress.
"""
