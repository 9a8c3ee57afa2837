"""Cython core of fastcoord: one extension per subsystem (see the .pxd files)."""
