"""Jobs as values: the Job object, ids (ULIDs), the stored record's format, the state the
scripts keep beside it, and arguments as JSON. Imports nothing that talks to Redis."""
