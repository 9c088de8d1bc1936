"""Chaos testing of a replicated group: faults on a seeded schedule, a recorded history, a checker."""
