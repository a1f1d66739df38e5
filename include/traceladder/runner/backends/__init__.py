"""How a rung spec becomes a command: the CPU proxy (local) or Primus under madengine-style tools (docker)."""
