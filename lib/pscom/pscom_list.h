/*
 * pscom_list.h - intrusive circular doubly linked list.
 */
#ifndef PSCOM_LIST_H
#define PSCOM_LIST_H

#include <stddef.h>

typedef struct pscom_list {
    struct pscom_list *next, *prev;
} pscom_list_t;

#define PSCOM_LIST_INIT(name) {&(name), &(name)}

static inline void pscom_list_init(pscom_list_t *head)
{
    head->next = head->prev = head;
}

static inline int pscom_list_empty(const pscom_list_t *head)
{
    return head->next == head;
}

static inline void pscom_list_insert_(pscom_list_t *item, pscom_list_t *prev,
                                      pscom_list_t *next)
{
    next->prev = item;
    item->next = next;
    item->prev = prev;
    prev->next = item;
}

/* append at the tail */
static inline void pscom_list_add_tail(pscom_list_t *item, pscom_list_t *head)
{
    pscom_list_insert_(item, head->prev, head);
}

/* insert at the head */
static inline void pscom_list_add(pscom_list_t *item, pscom_list_t *head)
{
    pscom_list_insert_(item, head, head->next);
}

/* insert item before pos */
static inline void pscom_list_add_before(pscom_list_t *item, pscom_list_t *pos)
{
    pscom_list_insert_(item, pos->prev, pos);
}

static inline void pscom_list_del(pscom_list_t *item)
{
    item->next->prev = item->prev;
    item->prev->next = item->next;
    item->next = item->prev = item; /* detached item is an empty list */
}

/* is the item linked into some list? (items must be init'ed/deleted with the helpers) */
static inline int pscom_list_linked(const pscom_list_t *item)
{
    return item->next != item;
}

static inline size_t pscom_list_count(const pscom_list_t *head)
{
    size_t n = 0;
    for (const pscom_list_t *p = head->next; p != head; p = p->next) n++;
    return n;
}

#define pscom_list_entry(ptr, type, member)                                    \
    ((type *)((char *)(ptr)-offsetof(type, member)))

#define pscom_list_for_each(pos, head)                                         \
    for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)

#define pscom_list_for_each_safe(pos, tmp, head)                               \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head);           \
         (pos) = (tmp), (tmp) = (pos)->next)

#endif /* PSCOM_LIST_H */
