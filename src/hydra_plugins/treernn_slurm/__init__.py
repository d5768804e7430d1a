"""treernn's launchers for Hydra (``hydra/launcher=slurm``): Hydra instantiates launchers only from
classes defined in the ``hydra_plugins`` package, and imports all of it when it starts."""
