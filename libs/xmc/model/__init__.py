"""Pure state model of XMC: enums, the JobSet mapping, the state guard and experiment rollups."""
