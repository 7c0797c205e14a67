"""IMPALA and APPO building blocks (Espeholt et al. 2018; Luo et al. 2020): V-trace
(:mod:`cairn.algorithms.impala.vtrace`) and the losses over it
(:mod:`cairn.algorithms.impala.loss`), pure functions on cairn's batch layout.

Nothing here is public API yet: there is no IMPALA or APPO algorithm or config; the modules are
imported by their full names.
"""

__all__: list[str] = []
