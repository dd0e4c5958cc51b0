package main

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestPoolTimeoutSaid: an S3 server that takes the connection and never
// answers fails a pool command with what happened ("no answer within 1s
// (--pool-timeout)"), not "context deadline exceeded".
func TestPoolTimeoutSaid(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn // accepted, never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	code, _, errOut := runCmd("pool", "ls", "--pool", "s3://kvfs/p", "--endpoint", "http://"+ln.Addr().String(), "--etcd", "127.0.0.1:1", "--pool-timeout", "1s")
	if code != exitFailure || !strings.Contains(errOut, "no answer within 1s (--pool-timeout)") || strings.Contains(errOut, "context deadline exceeded") {
		t.Errorf("pool ls against a silent S3 server: exit %d: %s", code, errOut)
	}
}

// TestInterruptedSaid: a command stopped by SIGINT (its context
// canceled) says it was interrupted, not "context canceled".
func TestInterruptedSaid(t *testing.T) {
	st := filepath.Join(t.TempDir(), "store")
	mustRun(t, "init", st)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"put", st, whole300, "a"}, &out, &errOut)
	if code != exitCanceled || !strings.HasPrefix(errOut.String(), "kvfs put: interrupted (SIGINT or SIGTERM)") || strings.Contains(errOut.String(), "context canceled") {
		t.Errorf("put with its context canceled: exit %d: %s", code, errOut.String())
	}
	if got := errorText("x", context.DeadlineExceeded); strings.Contains(got, "deadline") || !strings.Contains(got, "timed out") {
		t.Errorf("errorText(DeadlineExceeded) = %q", got)
	}
}
