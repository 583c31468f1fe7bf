"""The HTML trace report (:mod:`.html`), its inline assets and the step table it shares with the
command line and the fixers."""
