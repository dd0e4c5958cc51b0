package store

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/kvfs/kvfs/manifest"
)

// Settings are the store's capacity, retention and chunking settings.
// They live in
// the index (manifest.Tx.Setting), so that `kvfs config` offline and a
// mount's flags set them for good, and the store keeps the current ones in
// memory: a daemon applies a change made through its control socket at
// once (SetSettings wakes the evictor).
type Settings struct {
	// Capacity is the stored bytes the store keeps under, 0 for no limit.
	Capacity int64 `json:"capacity"`
	// LowWater is the percentage of Capacity that eviction brings stored
	// bytes down to, so that it runs in batches, not at every commit.
	LowWater int `json:"low_water"`
	// Retention is the eviction order: RetentionLRU or RetentionCostSize.
	Retention string `json:"retention"`
	// Chunking is how files of no parsed format are cut from now on:
	// ChunkingContent (where their bytes say, cdc.go) or ChunkingFixed
	// (every C bytes from offset 0, as stores did before: cheaper to
	// commit, but a copy shifted by a byte shares nothing). Files
	// already stored keep their chunks.
	Chunking string `json:"chunking"`
}

// Chunking settings.
const (
	ChunkingContent = "content"
	ChunkingFixed   = "fixed"
)

// DefaultSettings are a store's settings until changed.
var DefaultSettings = Settings{LowWater: 90, Retention: RetentionLRU, Chunking: ChunkingContent}

// SettingKeys are the names `kvfs config` takes.
var SettingKeys = []string{"capacity", "low_water", "retention", "chunking"}

// apply sets key to value in st, checking the value.
func (st *Settings) apply(key, value string) error {
	switch key {
	case "capacity":
		n, err := ParseSize(value)
		if err != nil {
			return fmt.Errorf("setting capacity=%s: %w", value, err)
		}
		st.Capacity = n
	case "low_water":
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(value), "%"))
		if err != nil || n < 1 || n > 100 {
			return fmt.Errorf("setting low_water=%s: want a percentage of the capacity, 1 to 100", value)
		}
		st.LowWater = n
	case "retention":
		if err := CheckPolicy(value); err != nil {
			return fmt.Errorf("setting retention=%s: %w", value, err)
		}
		st.Retention = value
	case "chunking":
		if value != ChunkingContent && value != ChunkingFixed {
			return fmt.Errorf("setting chunking=%s: want %s or %s", value, ChunkingContent, ChunkingFixed)
		}
		st.Chunking = value
	default:
		return fmt.Errorf("setting %s=%s: unknown key %q (known: %s)", key, value, key, strings.Join(SettingKeys, ", "))
	}
	return nil
}

// CheckSetting returns the error SetSettings would give for key=value.
func CheckSetting(key, value string) error {
	st := DefaultSettings
	return st.apply(key, value)
}

// values is st as the index stores it.
func (st Settings) values() map[string]string {
	return map[string]string{
		"capacity":  strconv.FormatInt(st.Capacity, 10),
		"low_water": strconv.Itoa(st.LowWater),
		"retention": st.Retention,
		"chunking":  st.Chunking,
	}
}

// readSettings reads the settings from tx, defaults for those not set.
func readSettings(tx *manifest.Tx) (Settings, error) {
	st := DefaultSettings
	set := tx.Settings()
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if !slices.Contains(SettingKeys, k) {
			continue // a later kvfs's; kept, not ours to judge
		}
		if err := st.apply(k, set[k]); err != nil {
			return st, err
		}
	}
	return st, nil
}

// Settings returns the store's current settings.
func (s *Store) Settings() Settings {
	s.retain.mu.Lock()
	defer s.retain.mu.Unlock()
	return s.retain.settings
}

// SetSettings changes the settings named in kv (key → value, keys of
// SettingKeys) in one transaction and applies them at once; nothing
// changes if one is invalid. It returns the settings now in force.
func (s *Store) SetSettings(kv map[string]string) (Settings, error) {
	st := s.Settings()
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		if err := st.apply(k, kv[k]); err != nil {
			return s.Settings(), err
		}
	}
	err := s.db.Update(func(tx *manifest.Tx) error {
		for k, v := range st.values() {
			if err := tx.PutSetting(k, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return s.Settings(), fmt.Errorf("config %s: %w", s.dir, err)
	}
	s.retain.mu.Lock()
	s.retain.settings = st
	s.retain.mu.Unlock()
	s.KickEviction()
	return st, nil
}

// loadSettings reads the settings at open.
func (s *Store) loadSettings() error {
	var st Settings
	err := s.db.View(func(tx *manifest.Tx) error {
		var err error
		st, err = readSettings(tx)
		return err
	})
	if err != nil {
		return fmt.Errorf("settings of %s: %w", s.dir, err)
	}
	s.retain.mu.Lock()
	s.retain.settings = st
	s.retain.mu.Unlock()
	return nil
}

// Retention policies (gc.Plan orders the candidates under them).
const (
	RetentionLRU      = "lru"
	RetentionCostSize = "cost-size"
)

// CheckPolicy returns an error naming p unless it is a known policy.
func CheckPolicy(p string) error {
	switch p {
	case RetentionLRU, RetentionCostSize:
		return nil
	}
	return fmt.Errorf("unknown retention policy %q (want %q or %q)", p, RetentionLRU, RetentionCostSize)
}
