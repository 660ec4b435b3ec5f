"""Mean-field team battles (MF-MAPPO): work in progress (issue 5); not registered yet."""
