//go:build linux && race

package tests

const raceEnabled = true
