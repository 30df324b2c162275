// local configure stub (not committed)
