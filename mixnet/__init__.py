"""mixnet: a generic cascade mixnet carrying fixed-size opaque payloads."""
