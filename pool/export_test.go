package pool

import (
	"context"
	"time"
)

// RevokeLease ends this host's etcd session lease at once, as an expiry
// would: the tests inject lease expiry with it.
func (p *Pool) RevokeLease() {
	p.coord.mu.Lock()
	s := p.coord.sess
	p.coord.mu.Unlock()
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p.coord.cli.Revoke(ctx, s.Lease())
}

// BeforeEvict makes f run before each eviction's transaction, so that a
// test can change the name in between.
func (p *Pool) BeforeEvict(f func(path string)) { p.beforeEvict = f }
