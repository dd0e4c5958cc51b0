package manifest

import "strings"

// Store settings (capacity, low-water mark, retention policy: see
// store/settings.go) live in the meta bucket under "setting.<name>", so
// that they are written in a transaction like everything else, persist,
// and need no bucket of their own.
const settingPrefix = "setting."

// Setting returns the value of setting name, and whether it is set.
func (t *Tx) Setting(name string) (string, bool) {
	v := t.b(bucketMeta).Get([]byte(settingPrefix + name))
	if v == nil {
		return "", false
	}
	return string(v), true
}

// PutSetting sets setting name to value; an empty value removes it (the
// default applies).
func (t *Tx) PutSetting(name, value string) error {
	k := []byte(settingPrefix + name)
	if value == "" {
		return t.b(bucketMeta).Delete(k)
	}
	return t.b(bucketMeta).Put(k, []byte(value))
}

// Settings returns every setting that is set.
func (t *Tx) Settings() map[string]string {
	out := map[string]string{}
	c := t.b(bucketMeta).Cursor()
	p := []byte(settingPrefix)
	for k, v := c.Seek(p); k != nil && strings.HasPrefix(string(k), settingPrefix); k, v = c.Next() {
		out[string(k[len(p):])] = string(v)
	}
	return out
}
