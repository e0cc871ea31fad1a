package bucket_test

import (
	"context"
	"fmt"
	"time"

	"github.com/admitter/admitter/bucket"
)

// The README's timeline: the same burst of 30 jobs at 12:00:40 under a bucket, a window and a
// quota that each allow "10 a minute", as a lane drains it (asking again after each wait). It
// prints how many jobs are admitted in each 20-second slot.
func Example_limitKinds() {
	start := time.Date(2026, 11, 21, 12, 0, 40, 0, time.UTC)
	for _, l := range []bucket.Limit{
		{Name: "bucket", Capacity: 10, Interval: 6 * time.Second, Rate: "10/m"},
		{Name: "window", Kind: bucket.KindWindow, Capacity: 10, Window: time.Minute},
		{Name: "quota", Kind: bucket.KindQuota, Capacity: 10, Period: bucket.Minute},
	} {
		plan, _ := bucket.NewPlan(l.Name, l)
		now := start
		m := bucket.NewMemory(bucket.Options{}, func() time.Time { return now })
		slots := make([]int, 7)
		for id := int64(1); id <= 30; {
			var jobs []bucket.Job
			for j := id; j <= 30; j++ {
				jobs = append(jobs, bucket.Job{ID: j, Weight: 1})
			}
			res, err := m.Admit(context.Background(), bucket.Batch{Tenant: "t", Plan: plan, Owner: 1, Jobs: jobs})
			if err != nil {
				panic(err)
			}
			for _, o := range res.Outcomes {
				if o.Admitted() {
					slots[now.Sub(start)/(20*time.Second)]++
					id++
				}
			}
			now = now.Add(res.Wait)
		}
		fmt.Println(l.Name, slots)
	}
	// Output:
	// bucket [13 3 3 4 3 3 1]
	// window [10 0 0 10 0 0 10]
	// quota [10 10 0 0 10 0 0]
}
