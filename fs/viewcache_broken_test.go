package fs

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kvfs/kvfs/store"
)

// TestViewCacheBroken: a broken view's error is answered for brokenTTL,
// for the same snapshot, directory and caller only, and the remembered
// errors stay within brokenMax.
func TestViewCacheBroken(t *testing.T) {
	var c viewCache
	now := time.Unix(1000, 0)
	user := &store.Cred{UID: 1000, GID: 1000}
	key := brokenKey("m", 7, user)
	boom := errors.New("block missing")
	c.noteBroken(key, boom, now)
	if err := c.brokenErr(key, now.Add(brokenTTL-time.Second)); err != boom {
		t.Errorf("within the TTL: %v", err)
	}
	if err := c.brokenErr(key, now.Add(brokenTTL)); err != nil {
		t.Errorf("after the TTL: %v", err)
	}
	for _, other := range []string{brokenKey("m", 7, nil), brokenKey("m", 8, user), brokenKey("m", 7, &store.Cred{UID: 1001, GID: 1000}), brokenKey("n", 7, user)} {
		if err := c.brokenErr(other, now); err != nil {
			t.Errorf("%s: %v", other, err)
		}
	}
	for i := 0; i < 3*brokenMax; i++ {
		c.noteBroken(fmt.Sprint(i), boom, now)
	}
	if len(c.broken) > brokenMax {
		t.Errorf("%d broken views kept, max %d", len(c.broken), brokenMax)
	}
}
