//go:build !linux && !darwin

package main

import "errors"

// mountTable is not read on this system: the checks that need it are
// skipped (mountAt finds nothing).
func mountTable() ([]mountEntry, error) { return nil, errors.New("no mount table on this system") }
