"""Who may call the reference server, and how much one caller may hold: bearer tokens,
TLS, the REST door's browser policy, and the limits on open streams."""
