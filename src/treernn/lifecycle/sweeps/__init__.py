"""Sweeps that survive interruptions: a multirun's layout and the rules of resuming it
(:mod:`.layout`), its start and end (:mod:`.summary`), a sweep trained further (:mod:`.extend`),
and a sweep archived and restored as data (:mod:`.archive`)."""
