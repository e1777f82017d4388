"""File systems by URL: one interface (`base.FileSystem`), one backend per scheme, and the router that picks them."""
