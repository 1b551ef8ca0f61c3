"""Generated from proto/ by scripts/generate. Do not edit."""
