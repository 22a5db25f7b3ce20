"""What the reference server shows about itself: Prometheus metrics and the dashboard,
both served on the REST door."""
