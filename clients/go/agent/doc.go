// Package agent is a small hand-written layer over the generated General
// Agent Service client (package general_agentv1 in ../gen/general_agent/v1):
//
//   - [Client.Turn] streams one turn as an iterator of events
//     (for ev, err := range client.Turn(...));
//   - [Client.Run] drives a turn over RunSession, running the host's hosted
//     tool handlers, submitting their results and answering approvals through
//     a callback, until the run's terminal run_finished;
//   - [FromError] and [FromStatus] decode an error's google.rpc.ErrorInfo
//     (reason, metadata), BadRequest field violations and RetryInfo.
//
// Everything else is the generated client, embedded in [Client]: every RPC is
// there with its generated request and response messages.
//
// # Importing
//
// The module is github.com/general-agent/general-agent/clients/go (the
// go.mod in clients/go), so the packages are
//
//	import (
//		"github.com/general-agent/general-agent/clients/go/agent"
//		agentv1 "github.com/general-agent/general-agent/clients/go/gen/general_agent/v1"
//	)
//
// Until the module is published, a host builds against a checkout of this
// repository with a replace directive in its own go.mod:
//
//	require github.com/general-agent/general-agent/clients/go v0.0.0
//	replace github.com/general-agent/general-agent/clients/go => ../general-agent/clients/go
//
// See docs/go-client.md in the repository for complete programs.
package agent
