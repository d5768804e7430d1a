"""treernn: Lightning + Hydra experiments for recurrent networks with a tree-structured bias."""

__version__ = "0.1.0"
