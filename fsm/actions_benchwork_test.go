package fsm

import "context"

// benchWork is BenchmarkActionLife's action, which does nothing.
func benchWork(context.Context, *ActionRun) error { return nil }
