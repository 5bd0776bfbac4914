/*
 * A work queue: jobs on a partitioned topic, shared out among the members
 * of a consumer group, each job handled by one member.
 *
 *   cc work_queue.c $(pkg-config --cflags --libs rill) -pthread -o work_queue && ./work_queue
 *
 * A consumer group divides a topic's partitions among its live members;
 * each member polls only its own partitions and commits what it finished,
 * so adding a member adds a worker. Here two members, each on a thread of
 * its own, share four partitions. The program exits non-zero if a job is
 * lost or handled twice.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rill.h>

#define JOBS 100
#define WORKERS 2
/* How long the workers may take, in all, before the example gives up. */
#define DEADLINE_S 30

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int handled[JOBS];   /* times each job was handled */
static int done;            /* jobs handled at least once */
static int per_worker[WORKERS];

struct worker {
    int id;
    rill_consumer *consumer; /* used from this worker's thread only */
    rill_status status;
};

static int fail(const char *what, rill_status st) {
    char err[256];
    rill_last_error(err, sizeof err); /* the reason, kept per thread */
    fprintf(stderr, "%s failed: %s: %s\n", what, rill_status_name(st), err);
    return 1;
}

static void *work(void *arg) {
    struct worker *w = arg;
    time_t give_up = time(NULL) + DEADLINE_S;
    for (;;) {
        pthread_mutex_lock(&lock);
        int finished = done == JOBS;
        pthread_mutex_unlock(&lock);
        if (finished || time(NULL) > give_up) break;

        /* Up to 16 messages, waiting up to 50 ms for the first. They stay
         * valid until this consumer's next poll. */
        const rill_message *jobs = NULL;
        size_t count = 0;
        w->status = rill_consumer_poll(w->consumer, 16, 50, &jobs, &count);
        if (w->status != RILL_OK) {
            fail("rill_consumer_poll", w->status);
            break;
        }
        for (size_t i = 0; i < count; i++) {
            /* The payload is not NUL-terminated: copy it to parse it. */
            char text[32] = {0};
            memcpy(text, jobs[i].payload, jobs[i].payload_len < sizeof text - 1 ? jobs[i].payload_len : sizeof text - 1);
            int n = atoi(text + strlen("job-"));
            pthread_mutex_lock(&lock);
            if (n >= 0 && n < JOBS && handled[n]++ == 0) done++;
            per_worker[w->id]++;
            pthread_mutex_unlock(&lock);
        }
        /* Done with what it polled: the group moves past it. A worker that
         * dies before committing leaves its jobs to be polled again by
         * whoever takes its partitions. */
        w->status = rill_consumer_commit(w->consumer);
        if (w->status != RILL_OK) {
            fail("rill_consumer_commit", w->status);
            break;
        }
    }
    return NULL;
}

int main(void) {
    rill_broker *broker = NULL;
    rill_status st = rill_broker_new(NULL, &broker);
    if (st != RILL_OK) return fail("rill_broker_new", st);

    /* Partitions are the unit of parallelism: a group can keep at most this
     * many members busy. */
    rill_topic_options topic;
    rill_topic_options_init(&topic);
    topic.partitions = 4;
    if ((st = rill_topic_create(broker, "jobs/resize", &topic)) != RILL_OK) return fail("rill_topic_create", st);

    /* Join every worker before the jobs arrive, so the partitions are shared
     * out once. (A member that joins later takes partitions over from the
     * group's committed offsets: a job polled but not yet committed by the
     * member it was taken from is then handled again, at least once.) */
    struct worker workers[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        workers[i].id = i;
        workers[i].status = RILL_OK;
        st = rill_consumer_new(broker, "resizers", "jobs/resize", NULL, &workers[i].consumer);
        if (st != RILL_OK) return fail("rill_consumer_new", st);
    }

    for (int n = 0; n < JOBS; n++) {
        char body[32];
        snprintf(body, sizeof body, "job-%d", n);
        /* Unkeyed: spread over the partitions round-robin. Give jobs a key
         * when the jobs of one key must stay in order. */
        rill_record job = {NULL, 0, body, strlen(body), NULL, 0};
        if ((st = rill_publish(broker, "jobs/resize", &job, NULL)) != RILL_OK) return fail("rill_publish", st);
    }

    pthread_t threads[WORKERS];
    for (int i = 0; i < WORKERS; i++) pthread_create(&threads[i], NULL, work, &workers[i]);
    for (int i = 0; i < WORKERS; i++) pthread_join(threads[i], NULL);

    int ok = done == JOBS;
    for (int n = 0; n < JOBS; n++) ok = ok && handled[n] == 1;
    for (int i = 0; i < WORKERS; i++) {
        printf("worker %d handled %d jobs\n", i, per_worker[i]);
        ok = ok && per_worker[i] > 0 && workers[i].status == RILL_OK;
        rill_consumer_free(workers[i].consumer);
    }
    rill_broker_free(broker);
    if (!ok) fprintf(stderr, "expected %d jobs, each handled once, over %d busy workers\n", JOBS, WORKERS);
    return ok ? 0 : 1;
}
