"""Sweeps that survive interruptions: a multirun's layout and the rules of resuming it
(`.layout`), its start and end (`.summary`), a sweep trained further (`.extend`),
and a sweep archived and restored as data (`.archive`)."""
