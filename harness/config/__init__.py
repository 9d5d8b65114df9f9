"""Configuration as data: upstream pins (upstream_pin/*.toml) and scenarios (scenarios/*.toml)."""
