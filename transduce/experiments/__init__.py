"""Experiments: grids of training runs (`spec`), run on this machine (`runner`), the
ensembles of their seeds (`ensembles`), their aggregated tables beside the published
numbers (`report`), and the results without checkpoints (`export`)."""
