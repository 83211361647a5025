"""The upstream matrix, committed under patches/: :mod:`.table` its types, its files and their Markdown;
:mod:`.checks` what it says, checked, and the one verdict policy (carry, drop or stop)."""
