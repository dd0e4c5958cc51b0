package main

import "golang.org/x/sys/unix"

// errNoAttr is what removexattr(2) returns for an attribute a file does
// not have.
const errNoAttr = unix.ENOATTR
