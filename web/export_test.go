package web

import "github.com/canifinetune/canifinetune/evidence"

// WaitHeldOut waits for the background cross-validation the page's error
// table shows, so a test (a screenshot) sees its figures.
func WaitHeldOut() error {
	cases, err := evidence.DevCohort()
	if err != nil {
		return err
	}
	return heldOut.wait(cases)
}
