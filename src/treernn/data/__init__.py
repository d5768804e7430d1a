"""DataModules, readers, generators, vocabularies and downloaders."""
