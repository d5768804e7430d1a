"""The model-reading wing: how a trained model is read for use, and what it is once read.

- `treernn.models.load`: the one loading ladder (checkpoint, run directory, export, Hub);
- `treernn.models.kinds`: the one table of model kinds (task class -> public class, names);
- `treernn.models.model`: the public model classes and their methods (`treernn.api` re-exports
  them);
- `treernn.models.export` and `treernn.models.export_format`: exported models, written and read
  as data;
- `treernn.models.hub`: the Hugging Face Hub's methods; `treernn.models.trust`: which classes a
  checkpoint or an export may name.

Importing this package imports none of them (`treernn.checkpoints` reads `trust` without torch's
model code or the Hub).
"""
