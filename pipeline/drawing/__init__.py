"""Drawing a recorded fight: top-down PNG, GIF/MP4, Tacview ACMI, the spacetime graph."""
