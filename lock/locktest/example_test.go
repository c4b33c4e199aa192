package locktest_test

import (
	"fmt"

	"github.com/txkit/txkit/lock"
	"github.com/txkit/txkit/lock/locktest"
)

// A History catches two holders at once and tokens that do not rise. Enter right after taking
// the lock, Exit right before releasing it.
func ExampleHistory() {
	var h locktest.History
	h.Enter(lock.Token{Seq: 1})
	h.Exit()
	h.Enter(lock.Token{Seq: 2})
	h.Enter(lock.Token{Seq: 2}) // a second holder while the first still holds, with the same token
	h.Exit()
	h.Exit()
	fmt.Println(h.Holds(), "holds")
	fmt.Println(h.Err())
	// Output:
	// 3 holds
	// locktest: 2 holders at once (token 0.2)
	// locktest: token 0.2 does not follow the previous hold's 0.2
}
