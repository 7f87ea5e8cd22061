"""Presentation: everything that shows a run to a person, read from the run store.

- :mod:`.digest` reads one run into a :class:`~.digest.RunDigest` (the one read path of every view);
- :mod:`.summary` condenses digests (a run's summary, a comparison of runs);
- :mod:`.reporting` prints ``seal-platform show``; :mod:`.html_report` writes the HTML report;
- :mod:`.transcripts`, :mod:`.transcript_html`, :mod:`.transcript_pairs` decode and show episodes;
- :mod:`.progress` and :mod:`.run_display` are the terminal display of a run while it works;
- :mod:`.metrics` reads how step metrics are shown from the core's and the plugins' declarations
  (``register_metrics``): no view knows a plugin's metric names;
- :mod:`.listings` prints ``runs``, ``labels`` and ``settings``; :mod:`.fit` picks, for them, ``show``'s steps
  and ``compare``, the widest layout that keeps every identifier whole at the terminal's width.

The run loop never imports this package; the CLI does.
"""
