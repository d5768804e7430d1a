"""LightningModules, one per kind of task; any encoder with the shared interface fits any task."""
