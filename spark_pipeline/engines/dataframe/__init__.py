"""The DataFrame task engine: Spark reads a task's work units as one DataFrame and writes them with its own writers.

Same events and staged output as the records engine (engines/records), so the publish protocol is unchanged.
"""
