"""What every command runs on: how it ends (:mod:`.terminal`), its signals (:mod:`.signals`), and the line that
installs a missing extra (:mod:`.extras`)."""
