"""The encoders, one per file, torch only: each takes batch-first tensors and a padding mask and
returns an `treernn.encoders.base.EncoderOutput` (see ``CONTRIBUTING.md``)."""
