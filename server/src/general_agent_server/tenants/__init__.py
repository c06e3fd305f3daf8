"""What each tenant may do and use (docs/security.md): the rules from the settings and `[tenants.<name>]`
tables, and the run slots that bound concurrent runs per server and per tenant."""
