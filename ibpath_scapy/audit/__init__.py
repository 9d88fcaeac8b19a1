"""The audit: replay of decoded records into transactions and resolutions, the rule catalogue,
and its reports."""
