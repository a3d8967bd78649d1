"""Experiments: grids of training runs (`spec`), run on this machine (`runner`), and
their aggregated tables beside the published numbers (`report`)."""
