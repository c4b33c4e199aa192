// Command account is the tcc-order example's account service, a participant of both protocols.
// Its table is account(account, balance, frozen, spent).
//
//   - TCC (POST /tcc): a try freezes funds (balance → frozen) or refuses when the balance is too
//     low, a confirm spends them (frozen → spent), a cancel unfreezes them (frozen → balance).
//   - Saga (POST /saga): an action debits the account at once (balance → spent) or refuses, a
//     compensation refunds it (spent → balance).
//
// Each op runs behind the participant barrier in the same PostgreSQL transaction as the balance
// change, and writes a ledger row (account_ledger) the demo uses to prove nothing ran twice.
//
//	go run ./examples/tcc-order/account -schema demo -seed alice=1000,bob=300
package main

import "github.com/txkit/txkit/examples/tcc-order/app"

func main() { app.ParticipantMain(app.Account()) }
