package grpccall_test

import "context"

const envStarter = "TXKIT_GRPCCALL_STARTER"

type starterConfig struct{}

func starter(ctx context.Context, cfg starterConfig) error { return nil }
