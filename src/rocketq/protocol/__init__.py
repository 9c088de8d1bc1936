"""Wire formats shared by the broker, the store and the client."""
