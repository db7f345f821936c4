"""The Luigi wiring's parts that are not task classes (``pipeline/tasks.py`` holds those)."""
