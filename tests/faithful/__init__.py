"""Faithful variants: correct implementations of every dmref scheme, written from the docs,
that differ in what real kernels legitimately differ in (issue 19, part 1). run.py drives them."""
