"""Data loaders. Every loader returns a ``datasets.Dataset`` with named columns and a load report."""

from __future__ import annotations

from finesim.data.csts import read_csts
from finesim.data.errors import DataFormatError, LoadReport
from finesim.data.labels import minmax_scale, rescale, sick_to_sts
from finesim.data.nli import read_snli
from finesim.data.overlap import filter_overlap
from finesim.data.pairing import PairingReport, pair_conditions
from finesim.data.sts import read_senteval_subset, read_sick, read_stsb, senteval_subsets
from finesim.data.table import detect_format, open_table, read_table

__all__ = [
    "DataFormatError",
    "LoadReport",
    "PairingReport",
    "detect_format",
    "filter_overlap",
    "minmax_scale",
    "open_table",
    "pair_conditions",
    "read_csts",
    "read_senteval_subset",
    "read_sick",
    "read_snli",
    "read_stsb",
    "read_table",
    "rescale",
    "senteval_subsets",
    "sick_to_sts",
]
