package main

import (
	"fmt"
	"path/filepath"
	"strings"
)

// A store on macOS is kept out of Spotlight and Time Machine when kvfs
// init makes it: its packs are a cache's content in an opaque format,
// gigabytes that change all day; Spotlight would read them to no use and
// Time Machine would copy every rewritten pack again.
//
// Spotlight: an empty file named .metadata_never_index in the directory.
// Apple documents it for a volume's root; whether Spotlight honours it in
// an ordinary directory has varied between macOS versions (reports
// disagree), so docs/MACOS.md says how to check (mdutil, mdfind) and the
// sure alternative, a store directory whose name ends in .noindex.
// Time Machine: tmutil addexclusion, a "sticky" exclusion stored with the
// directory (an extended attribute), which needs no root and follows the
// directory when it moves. Both are best effort: a store that Spotlight
// indexes or Time Machine copies still works, so a failure is a warning.

// spotlightMarker is the file that asks Spotlight not to index a directory.
const spotlightMarker = ".metadata_never_index"

// tmutil is macOS's Time Machine tool.
const tmutil = "/usr/bin/tmutil"

// excludeSys is what excludeStore does to the system.
type excludeSys struct {
	create func(path string) error                           // create an empty file (no error if it exists)
	run    func(name string, args ...string) ([]byte, error) // a program's combined output
}

// excludeStore keeps the new store dir out of Spotlight and Time Machine
// on goos (macOS only). It returns what it did, and what failed, one line
// each.
func excludeStore(goos, dir string, sys excludeSys) (done, warnings []string) {
	if goos != "darwin" {
		return nil, nil
	}
	marker := filepath.Join(dir, spotlightMarker)
	if err := sys.create(marker); err != nil {
		warnings = append(warnings, fmt.Sprintf("could not keep %s out of Spotlight: create %s: %v", dir, marker, err))
	} else {
		done = append(done, fmt.Sprintf("kept out of Spotlight (%s)", spotlightMarker))
	}
	if out, err := sys.run(tmutil, "addexclusion", dir); err != nil {
		said := strings.TrimSpace(string(out))
		if said == "" {
			said = err.Error()
		}
		warnings = append(warnings, fmt.Sprintf("could not keep %s out of Time Machine: tmutil addexclusion %s: %s", dir, dir, said))
	} else {
		done = append(done, "kept out of Time Machine (tmutil addexclusion)")
	}
	return done, warnings
}
