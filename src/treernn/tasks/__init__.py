"""LightningModules, one per kind of task; any encoder that fits the interface runs under any task."""
